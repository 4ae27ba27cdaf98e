(** Proofs for [Balance.v]: the schedule with senders spread over each
    cell's holders is as correct as [Crossmesh.xplan]'s (same pieces, each
    sent by a rank holding its cell, the same traffic), its rounds as
    [Rounds.xrounds] promises, and every source rank sends at most its share
    of its cell's moved pieces rounded up to one piece. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Uneven Crossmesh Crossmeshproof Rounds Roundsproof Balance.
Import ListNotations.

Lemma lsum_cons : forall A (f : A -> nat) x l, lsum f (x :: l) = f x + lsum f l.
Proof. reflexivity. Qed.

(** * Holders and the deal *)

Lemma holders_in : forall SR r ks, In (r, ks) SR -> In r (holders SR ks).
Proof.
  intros SR r ks H. unfold holders. apply in_map_iff. exists (r, ks). split; auto.
  apply filter_In. split; auto. simpl. apply nat_list_eqb_spec. auto.
Qed.

Lemma nodup_holders : forall SR ks, NoDup (map fst SR) -> NoDup (holders SR ks).
Proof.
  intros SR ks. unfold holders. induction SR as [|s SR IH]; simpl; intros H; [constructor|].
  inversion H as [|? ? Hni Hnd]; subst.
  destruct (nat_list_eqb (snd s) ks); simpl; auto.
  constructor; auto. intro Hin. apply Hni. apply in_map_iff in Hin. destruct Hin as [x [Ex Hx]].
  apply filter_In in Hx. apply in_map_iff. exists x. split; [exact Ex|tauto].
Qed.

Lemma deal_in : forall h start k, h <> [] -> In (deal h start k) h.
Proof.
  intros h start k H. unfold deal. apply nth_In. apply Nat.mod_upper_bound.
  destruct h; simpl; [congruence|lia].
Qed.

Lemma deal_eqb : forall h start k i, NoDup h -> i < length h ->
  (deal h start k =? nth i h 0) = ((start + k) mod length h =? i).
Proof.
  intros h start k i Hnd Hi. unfold deal.
  assert (Hm : (start + k) mod length h < length h) by (apply Nat.mod_upper_bound; lia).
  destruct (Nat.eqb_spec ((start + k) mod length h) i) as [E|E].
  - rewrite E. apply Nat.eqb_refl.
  - apply Nat.eqb_neq. intro E'. apply E. apply (proj1 (NoDup_nth h 0) Hnd); auto.
Qed.

(** Distinct well-formed cells have distinct keys. *)
Lemma ckey_inj : forall sd a b, cell_okb sd a = true -> cell_okb sd b = true -> ckey sd a = ckey sd b -> a = b.
Proof.
  induction sd as [|cn sd IH]; intros [|x a] [|y b] Ha Hb E; simpl in *; try discriminate; auto.
  apply andb_true_iff in Ha as [Ha Ha']. apply andb_true_iff in Hb as [Hb Hb'].
  apply Nat.ltb_lt in Ha. apply Nat.ltb_lt in Hb.
  assert (Exy : x = y).
  { assert (Hm : (x + snd cn * ckey sd a) mod snd cn = (y + snd cn * ckey sd b) mod snd cn) by (rewrite E; auto).
    rewrite !(Nat.mul_comm (snd cn)), !Nat.mod_add, !Nat.mod_small in Hm by lia. exact Hm. }
  subst y. f_equal. apply IH; auto.
  apply Nat.add_cancel_l in E. apply (Nat.mul_cancel_l _ _ (snd cn)); lia.
Qed.

(** * Windows: how many of [n] consecutive numbers have remainder [i] modulo [g] *)

Definition win (g i a n : nat) : nat := lsum (fun k => if k mod g =? i then 1 else 0) (seq a n).

Lemma win_app : forall g i a n m, win g i a (n + m) = win g i a n + win g i (a + n) m.
Proof. intros. unfold win. rewrite seq_app, lsum_app. reflexivity. Qed.

Lemma win_full : forall g i a, i < g -> win g i a g = 1.
Proof.
  intros g i a Hi. induction a as [|a IH].
  - unfold win. transitivity (lsum (fun k => if k =? i then (fun _ => 1) k else 0) (seq 0 g)).
    + apply lsum_ext. intros k Hk. apply in_seq in Hk. rewrite Nat.mod_small by lia. reflexivity.
    + exact (lsum_pick_seq (fun _ => 1) i g Hi).
  - assert (E : win g i a (1 + g) = win g i a (g + 1)) by (f_equal; lia).
    rewrite !win_app, IH in E.
    assert (E1 : win g i (a + g) 1 = win g i a 1).
    { unfold win. simpl. replace (a + g) with (a + 1 * g) by lia. rewrite Nat.mod_add by lia. reflexivity. }
    rewrite E1, Nat.add_1_r in E. lia.
Qed.

Lemma win_le1 : forall g i a n, n <= g -> i < g -> win g i a n <= 1.
Proof.
  intros g i a n Hn Hi. pose proof (win_full g i a Hi) as E.
  replace g with (n + (g - n)) in E at 2 by lia. rewrite win_app in E. lia.
Qed.

(** At most [ceil (n / g)] of them. *)
Lemma win_bound : forall g i n a, 0 < g -> i < g -> win g i a n * g <= n + g - 1.
Proof.
  intros g i n. induction n as [n IH] using lt_wf_ind. intros a Hg Hi.
  destruct (Nat.lt_ge_cases n g) as [Hn|Hn].
  - destruct n as [|n].
    + unfold win. simpl. lia.
    + pose proof (win_le1 g i a (S n) ltac:(lia) Hi). nia.
  - replace n with (g + (n - g)) by lia. rewrite win_app, win_full by auto.
    specialize (IH (n - g) ltac:(lia) (a + g) Hg Hi). nia.
Qed.

(** * Each piece keeps its cell and box; a dealt one comes from a holder of its cell *)

Definition related (SR : list src) (self : nat) (q q' : piece) : Prop :=
  pcell q' = pcell q /\ pbox q' = pbox q /\
  (psrc q' = psrc q \/ (In (psrc q') (holders SR (pcell q)) /\ memb self (holders SR (pcell q)) = false)).

Lemma spread1_rel : forall sd SR start self ps cnt, (forall q, In q ps -> In (psrc q, pcell q) SR) ->
  Forall2 (related SR self) ps (fst (spread1 sd (holder_table sd SR) start self cnt ps)).
Proof.
  intros sd SR start self. induction ps as [|q ps IH]; intros cnt Hs; [constructor|].
  cbn [spread1]. rewrite holders_table.
  destruct (memb self (holders SR (pcell q))) eqn:Em; cbn [fst]; constructor.
  - split; [|split]; auto.
  - apply IH. intros; apply Hs; right; auto.
  - split; [|split]; cbn; auto. right. split; auto. apply deal_in.
    intro E. pose proof (holders_in _ _ _ (Hs q (or_introl eq_refl))) as Hh. rewrite E in Hh. contradiction.
  - apply IH. intros; apply Hs; right; auto.
Qed.

Lemma spread_rel : forall sd SR start pss tr cnt,
  (forall ps q, In ps pss -> In q ps -> In (psrc q, pcell q) SR) ->
  length (spread sd (holder_table sd SR) start tr cnt pss) = length pss /\
  forall j ps, nth_error pss j = Some ps ->
  exists ps', nth_error (spread sd (holder_table sd SR) start tr cnt pss) j = Some ps' /\
    Forall2 (related SR (nth j tr 0)) ps ps'.
Proof.
  intros sd SR start. induction pss as [|ps pss IH]; intros tr cnt Hs; cbn [spread length].
  - split; auto. intros [|j]; discriminate.
  - destruct (IH (tl tr) (snd (spread1 sd (holder_table sd SR) start (hd 0 tr) cnt ps))) as [Hl Hn].
    { intros ps0 q H1 H2. apply (Hs ps0); [right|]; auto. }
    split; [lia|]. intros [|j] ps0 E; cbn [nth_error] in E |- *.
    + injection E as <-. eexists; split; [reflexivity|].
      replace (nth 0 tr 0) with (hd 0 tr) by (destruct tr; reflexivity).
      apply spread1_rel. intros q Hq. apply (Hs ps); [left|]; auto.
    + destruct (Hn j ps0 E) as [ps' [E1 E2]]. exists ps'. split; auto.
      replace (nth (S j) tr 0) with (nth j (tl tr) 0) by (destruct tr; [destruct j|]; reflexivity). auto.
Qed.

Lemma lsum_rel_box : forall SR self (f : box -> nat) ps ps', Forall2 (related SR self) ps ps' ->
  lsum (fun q => f (pbox q)) ps' = lsum (fun q => f (pbox q)) ps.
Proof.
  intros SR self f ps ps' H. induction H as [|q q' ps ps' [_ [E _]] _ IH]; simpl; auto. rewrite E, IH. reflexivity.
Qed.

Lemma traffic_rel : forall SR self ps ps', Forall2 (related SR self) ps ps' ->
  (forall q, In q ps -> In (psrc q, pcell q) SR) -> traffic self ps' = traffic self ps.
Proof.
  intros SR self ps ps' H. unfold traffic.
  induction H as [|q q' ps ps' [Ec [Eb Es]] _ IH]; simpl; intros Hs; auto.
  rewrite IH by (intros; apply Hs; auto). rewrite Eb. f_equal.
  destruct Es as [E|[Hin Hm]]; [rewrite E; reflexivity|].
  assert (Hq : In (psrc q) (holders SR (pcell q))) by (apply holders_in; apply Hs; auto).
  destruct (Nat.eqb_spec (psrc q') self) as [E1|E1].
  - rewrite E1 in Hin. apply memb_spec in Hin. congruence.
  - destruct (Nat.eqb_spec (psrc q) self) as [E2|E2]; auto.
    rewrite E2 in Hq. apply memb_spec in Hq. congruence.
Qed.

Lemma sound_rel : forall SR self ps ps', Forall2 (related SR self) ps ps' ->
  forall q', In q' ps' -> exists q, In q ps /\ pcell q' = pcell q /\ pbox q' = pbox q /\
    (psrc q' = psrc q \/ In (psrc q') (holders SR (pcell q))).
Proof.
  intros SR self ps ps' H. induction H as [|q q' ps ps' [Ec [Eb Es]] _ IH]; simpl; intros q0 Hq0; [contradiction|].
  destruct Hq0 as [<-|Hq0].
  - exists q. split; auto. split; [|split]; auto. destruct Es as [E|[E _]]; auto.
  - destruct (IH q0 Hq0) as [q1 [H1 H2]]. exists q1. auto.
Qed.

(** A target whose pieces cover its box once, each from a rank holding
    the piece's cell, assembles its box of any global array. *)
Lemma assemble_sound : forall sd SR T ps V (A : list nat -> V) L, is_source A sd SR L ->
  (forall p, in_boxb p T = true -> lsum (fun q => if in_boxb p (pbox q) then 1 else 0) ps = 1) ->
  (forall q, In q ps -> In (psrc q, pcell q) SR /\
     forall p, in_boxb p (pbox q) = true -> in_boxb p T = true /\ in_boxb p (cellbox sd (pcell q)) = true) ->
  forall i, in_boxb (shift T i) T = true -> assemble L sd T ps i = Some (A (shift T i)).
Proof.
  intros sd SR T ps V A L HL Hcov Hs i Hi. unfold assemble.
  pose proof (Hcov _ Hi) as Hc.
  destruct (lsum_one_find _ (fun q => in_boxb (shift T i) (pbox q)) ps) as [q Hq]; [lia|].
  rewrite Hq. apply find_some in Hq. destruct Hq as [Hq Hp].
  destruct (Hs q Hq) as [Hin Hb]. destruct (Hb _ Hp) as [_ Hcb].
  rewrite (HL _ _ Hin). rewrite shift_unshift; auto.
Qed.

(** **End to end, balanced**: [xplan_bal] keeps every guarantee of
    [xplan_correct] (for every rotation [start]): one entry per target
    device; every target assembles exactly its block of any global array;
    every element of its block arrives once, from a source rank whose block
    holds it; the pieces add up to its block; it receives from other ranks
    its block size less what it already holds. *)
Theorem xplan_bal_correct : forall m1 r1 t1 m2 r2 t2 start pss,
  xplan_bal m1 r1 t1 m2 r2 t2 start = Some pss ->
  xschedule_ok m1 r1 t1 m2 r2 t2 pss.
Proof.
  unfold xschedule_ok.
  intros m1 r1 t1 m2 r2 t2 start pss' H. unfold xplan_bal in H.
  destruct (xplan m1 r1 t1 m2 r2 t2) as [pss|] eqn:Ex; [|discriminate]. injection H as <-.
  destruct (xplan_correct _ _ _ _ _ _ _ Ex) as [Hl Hn].
  assert (Hs : forall ps q, In ps pss -> In q ps -> In (psrc q, pcell q) (srcs m1 r1 t1)).
  { intros ps q Hps Hq. apply In_nth_error in Hps. destruct Hps as [j Ej].
    assert (Hj : j < ndevices m2) by (rewrite <- Hl; apply nth_error_Some; congruence).
    destruct (Hn j Hj) as [ps0 [E0 [_ [_ [Hsnd _]]]]]. rewrite Ej in E0. injection E0 as <-. apply Hsnd; auto. }
  destruct (spread_rel (sdims m1 t1) (srcs m1 r1 t1) start pss r2 (NatMap.empty nat) Hs) as [Hl' Hn'].
  split; [lia|]. intros j Hj.
  destruct (Hn j Hj) as [ps [E [Hasm [Hcov [Hsnd [Hvol Htr]]]]]].
  destruct (Hn' j ps E) as [ps' [E' Hr]].
  exists ps'. split; [exact E'|].
  assert (Hcov' : forall p, in_boxb p (tbox m2 t2 (coords_of_rank m2 j)) = true ->
                   lsum (fun q => if in_boxb p (pbox q) then 1 else 0) ps' = 1).
  { intros p Hp. rewrite (lsum_rel_box _ _ (fun B => if in_boxb p B then 1 else 0) _ _ Hr). apply Hcov; auto. }
  assert (Hsnd' : forall q, In q ps' -> In (psrc q, pcell q) (srcs m1 r1 t1) /\
       forall p, in_boxb p (pbox q) = true ->
         in_boxb p (tbox m2 t2 (coords_of_rank m2 j)) = true /\
         in_boxb p (cellbox (sdims m1 t1) (pcell q)) = true).
  { intros q' Hq'. destruct (sound_rel _ _ _ _ Hr q' Hq') as [q [Hq [Ec [Eb Es]]]].
    destruct (Hsnd q Hq) as [Hin Hbox]. rewrite Ec, Eb. split; [|exact Hbox].
    destruct Es as [Es|Es]; [rewrite Es; exact Hin|]. rewrite <- Ec. apply in_holders. rewrite Ec. exact Es. }
  split; [|split; [exact Hcov'|split; [exact Hsnd'|split]]].
  - intros V A L HL i Hi. rewrite <- shift_tbox. apply (assemble_sound _ (srcs m1 r1 t1)); auto.
    + intros r b Hin k. apply in_srcs in Hin. destruct Hin as [i' [Hi' Es]]. injection Es as -> ->.
      rewrite HL by auto. rewrite shift_cellbox. auto.
    + apply tbox_valid; auto.
  - rewrite (lsum_rel_box _ _ vol _ _ Hr). exact Hvol.
  - rewrite (traffic_rel _ _ _ _ Hr). exact Htr. intros q Hq. apply Hsnd; auto.
Qed.

(** The staged form of the balanced schedule: as [Roundsproof.xrounds_correct]. *)
Theorem xrounds_bal_correct : forall m1 r1 t1 m2 r2 t2 start pss budget,
  xplan_bal m1 r1 t1 m2 r2 t2 start = Some pss ->
  Permutation (concat (xrounds budget r2 pss)) (xcuts budget r2 pss) /\
  (forall rd, In rd (xrounds budget r2 pss) -> bounded budget rd) /\
  forall j self T, nth_error (tgts m2 r2 t2) j = Some (self, T) ->
  exists ps, nth_error pss j = Some ps /\
    (forall p, in_boxb p T = true ->
       lsum (fun q => if psrc q =? self then (if in_boxb p (pbox q) then 1 else 0) else 0) ps
       + lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
              (concat (xrounds budget r2 pss)) = 1) /\
    (forall c, In c (concat (xrounds budget r2 pss)) -> ctgt c = j ->
       cdst c = self /\ exists q, In q ps /\ psrc q <> self /\ csrc c = psrc q /\
         forall p, in_boxb p (cbox c) = true -> in_boxb p (pbox q) = true).
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss budget H.
  destruct (xplan_bal_correct _ _ _ _ _ _ _ _ H) as [Hl Hn].
  pose proof (pack_perm budget (xcuts budget r2 pss)) as Hp.
  split; [exact Hp|]. split; [apply pack_bounded|].
  intros j self T E.
  assert (Hj : j < ndevices m2).
  { rewrite <- (seq_length (ndevices m2) 0), <- (map_length (fun j => (nth j r2 0, tbox m2 t2 (coords_of_rank m2 j)))).
    rewrite <- tgts_nth_map. apply nth_error_Some. congruence. }
  assert (ET : T = tbox m2 t2 (coords_of_rank m2 j)).
  { rewrite tgts_nth_map, nth_error_map, nth_error_seq0 in E by auto. cbn in E. congruence. }
  destruct (Hn j Hj) as [ps [Eps [_ [Hcov _]]]]. rewrite <- ET in Hcov.
  exists ps. split; [exact Eps|].
  assert (Hj' : j < length pss) by lia.
  assert (Hself : self = nth j r2 0) by (eapply tgts_nth; eauto).
  assert (Hps : nth j pss [] = ps) by (apply nth_error_nth; exact Eps).
  split.
  - intros p Hp'. specialize (Hcov p Hp').
    rewrite (lsum_split _ (fun q => if in_boxb p (pbox q) then 1 else 0) (fun q => psrc q =? self) ps) in Hcov.
    cbv beta in Hcov.
    enough (E2 : lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
                      (concat (xrounds budget r2 pss))
                 = lsum (fun q => if psrc q =? self then 0 else if in_boxb p (pbox q) then 1 else 0) ps)
      by lia.
    unfold xrounds. rewrite (lsum_perm _ _ _ _ Hp).
    rewrite (xcuts_tgt budget r2 pss j (fun c => if in_boxb p (cbox c) then 1 else 0) Hj').
    rewrite <- Hself, Hps. apply tcuts_count.
  - intros c Hc Ht. apply (Permutation_in _ Hp) in Hc. apply xcuts_in in Hc. destruct Hc as [_ Hc].
    rewrite Ht, <- Hself, Hps in Hc. apply tcuts_in in Hc. destruct Hc as [Hd [_ [q [Hq [Hne [Hsrc Hin]]]]]].
    split; [exact Hd|]. exists q. auto.
Qed.

(** * The bound *)

Section Count.
Variables (sd : list (nat * nat)) (SR : list src) (start r : nat) (c : list nat) (i : nat).
Hypothesis Hnd : NoDup (map fst SR).
Hypothesis Hok : forall s, In s SR -> cell_okb sd (snd s) = true.
Hypothesis Hrc : In (r, c) SR.
Hypothesis Hi : i < length (holders SR c).
Hypothesis Hri : nth i (holders SR c) 0 = r.

Let g := length (holders SR c).

Lemma spread1_count : forall self ps cnt,
  (forall q, In q ps -> In (psrc q, pcell q) SR) ->
  (forall q, In q ps -> memb self (holders SR (pcell q)) = true -> psrc q = self) ->
  let out := spread1 sd (holder_table sd SR) start self cnt ps in
  find_or 0 (ckey sd c) (snd out)
    = find_or 0 (ckey sd c) cnt
      + lsum (fun q => if nat_list_eqb (pcell q) c && negb (psrc q =? self) then 1 else 0) (fst out) /\
  lsum (fun q => if (psrc q =? r) && negb (self =? r) then 1 else 0) (fst out)
    = win g i (start + find_or 0 (ckey sd c) cnt)
        (lsum (fun q => if nat_list_eqb (pcell q) c && negb (psrc q =? self) then 1 else 0) (fst out)).
Proof.
  intros self. induction ps as [|q ps IH]; intros cnt Hs Hself; cbn zeta.
  { cbn. split; [lia|reflexivity]. }
  assert (Hs' : forall q0, In q0 ps -> In (psrc q0, pcell q0) SR) by (intros; apply Hs; right; auto).
  assert (Hself' : forall q0, In q0 ps -> memb self (holders SR (pcell q0)) = true -> psrc q0 = self)
    by (intros; apply Hself; [right|]; auto).
  assert (Hq : In (psrc q, pcell q) SR) by (apply Hs; left; auto).
  assert (Hrh : In r (holders SR c)) by (apply holders_in; exact Hrc).
  cbn [spread1]. rewrite holders_table.
  destruct (memb self (holders SR (pcell q))) eqn:Em; cbn [fst snd]; rewrite !lsum_cons.
  - destruct (IH cnt Hs' Hself') as [E1 E2]. cbn zeta in E1, E2.
    rewrite (Hself q (or_introl eq_refl) Em), Nat.eqb_refl. cbn [negb]. rewrite andb_false_r.
    assert (Z : (self =? r) && negb (self =? r) = false) by (destruct (self =? r); reflexivity).
    rewrite Z, !Nat.add_0_l. split; assumption.
  - destruct (IH (NatMap.add (ckey sd (pcell q)) (S (find_or 0 (ckey sd (pcell q)) cnt)) cnt) Hs' Hself')
      as [E1 E2].
    cbn zeta in E1, E2. rewrite find_or_add in E1, E2.
    assert (Hdeal : In (deal (holders SR (pcell q)) start (find_or 0 (ckey sd (pcell q)) cnt)) (holders SR (pcell q))).
    { apply deal_in. intro E. pose proof (holders_in _ _ _ Hq) as Hh. rewrite E in Hh. contradiction. }
    assert (Hne : (deal (holders SR (pcell q)) start (find_or 0 (ckey sd (pcell q)) cnt) =? self) = false).
    { apply Nat.eqb_neq. intro E. rewrite E in Hdeal. apply memb_spec in Hdeal. congruence. }
    cbn [psrc pcell]. rewrite Hne. cbn [negb]. rewrite andb_true_r.
    destruct (nat_list_eqb (pcell q) c) eqn:Ec.
    + apply nat_list_eqb_spec in Ec. rewrite Ec in *. rewrite Nat.eqb_refl in E1, E2.
      assert (Hsr : (self =? r) = false).
      { apply Nat.eqb_neq. intro E. rewrite E in Em. apply Bool.not_true_iff_false in Em. apply Em.
        apply memb_spec. exact Hrh. }
      rewrite Hsr in E2 |- *. cbn [negb] in E2 |- *.
      assert (Hdr : (deal (holders SR c) start (find_or 0 (ckey sd c) cnt) =? r)
                    = ((start + find_or 0 (ckey sd c) cnt) mod g =? i)).
      { rewrite <- Hri. apply deal_eqb; auto. apply nodup_holders; exact Hnd. }
      rewrite Hdr, andb_true_r. split; [lia|]. rewrite E2.
      rewrite win_app. replace (start + find_or 0 (ckey sd c) cnt + 1) with (start + S (find_or 0 (ckey sd c) cnt))
        by lia.
      assert (W : win g i (start + find_or 0 (ckey sd c) cnt) 1
                  = if (start + find_or 0 (ckey sd c) cnt) mod g =? i then 1 else 0).
      { unfold win. cbn [seq]. rewrite lsum_cons. cbn [lsum fold_right]. apply Nat.add_0_r. }
      rewrite W. reflexivity.
    + assert (Hkey : (ckey sd (pcell q) =? ckey sd c) = false).
      { apply Nat.eqb_neq. intro E. apply ckey_inj in E.
        - rewrite E, (proj2 (nat_list_eqb_spec c c) eq_refl) in Ec. discriminate.
        - apply (Hok (psrc q, pcell q)). exact Hq.
        - apply (Hok (r, c)). exact Hrc. }
      assert (Hdr : (deal (holders SR (pcell q)) start (find_or 0 (ckey sd (pcell q)) cnt) =? r) = false).
      { apply Nat.eqb_neq. intro E. rewrite E in Hdeal. apply in_holders in Hdeal.
        assert (Eq : pcell q = c) by (eapply nodup_fst; eauto).
        rewrite Eq, (proj2 (nat_list_eqb_spec c c) eq_refl) in Ec. discriminate. }
      rewrite Hdr, Hkey in *. cbn [andb]. rewrite !Nat.add_0_l. split; assumption.
Qed.

Lemma spread_count : forall pss tr cnt,
  (forall ps q, In ps pss -> In q ps -> In (psrc q, pcell q) SR) ->
  (forall j ps q, nth_error pss j = Some ps -> In q ps ->
     memb (nth j tr 0) (holders SR (pcell q)) = true -> psrc q = nth j tr 0) ->
  nsent r tr (spread sd (holder_table sd SR) start tr cnt pss)
    = win g i (start + find_or 0 (ckey sd c) cnt) (nmoved c tr (spread sd (holder_table sd SR) start tr cnt pss)).
Proof.
  induction pss as [|ps pss IH]; intros tr cnt Hs Hself; cbn [spread nsent nmoved].
  - reflexivity.
  - destruct (spread1_count (hd 0 tr) ps cnt) as [E1 E2].
    + intros q Hq. apply (Hs ps); [left|]; auto.
    + intros q Hq Hm. replace (hd 0 tr) with (nth 0 tr 0) in * by (destruct tr; reflexivity).
      apply (Hself 0 ps); auto.
    + rewrite IH.
      * rewrite E2, E1, win_app. f_equal. f_equal. lia.
      * intros ps0 q H1 H2. apply (Hs ps0); [right|]; auto.
      * intros j ps0 q E H1 H2. replace (nth j (tl tr) 0) with (nth (S j) tr 0) in *
          by (destruct tr; [destruct j|]; reflexivity).
        apply (Hself (S j) ps0); auto.
Qed.

End Count.

Lemma lsum_vol_le : forall (P : piece -> bool) M ps, (forall q, In q ps -> P q = true -> vol (pbox q) <= M) ->
  lsum (fun q => if P q then vol (pbox q) else 0) ps <= lsum (fun q => if P q then 1 else 0) ps * M.
Proof.
  intros P M ps H. induction ps as [|q ps IH]; [cbn; lia|]. rewrite !lsum_cons.
  assert (IH' := IH (fun q0 Hq0 => H q0 (or_intror Hq0))).
  destruct (P q) eqn:E; [|lia]. pose proof (H q (or_introl eq_refl) E). nia.
Qed.

Lemma vsent_le : forall r c M tr pss,
  (forall j ps q, nth_error pss j = Some ps -> In q ps -> psrc q = r -> nth j tr 0 <> r -> pcell q = c) ->
  (forall j ps q, nth_error pss j = Some ps -> In q ps -> pcell q = c -> psrc q <> nth j tr 0 -> vol (pbox q) <= M) ->
  vsent r tr pss <= nsent r tr pss * M.
Proof.
  intros r c M tr pss. revert tr. induction pss as [|ps pss IH]; intros tr Hc HM; cbn [vsent nsent]; [lia|].
  assert (H1 : lsum (fun q => if (psrc q =? r) && negb (hd 0 tr =? r) then vol (pbox q) else 0) ps
               <= lsum (fun q => if (psrc q =? r) && negb (hd 0 tr =? r) then 1 else 0) ps * M).
  { apply lsum_vol_le. intros q Hq E. apply andb_true_iff in E as [E1 E2].
    apply Nat.eqb_eq in E1. apply negb_true_iff, Nat.eqb_neq in E2.
    replace (hd 0 tr) with (nth 0 tr 0) in E2 by (destruct tr; reflexivity).
    apply (HM 0 ps); auto.
    - apply (Hc 0 ps); auto.
    - congruence. }
  assert (H2 : vsent r (tl tr) pss <= nsent r (tl tr) pss * M).
  { apply IH.
    - intros j ps0 q E Hq. replace (nth j (tl tr) 0) with (nth (S j) tr 0) by (destruct tr; [destruct j|]; reflexivity).
      apply (Hc (S j) ps0); auto.
    - intros j ps0 q E Hq. replace (nth j (tl tr) 0) with (nth (S j) tr 0) by (destruct tr; [destruct j|]; reflexivity).
      apply (HM (S j) ps0); auto. }
  rewrite Nat.mul_add_distr_r. lia.
Qed.

(** **Senders balanced**: in a schedule [xplan_bal] returns (any rotation
    [start]), every source rank [r] holding cell [c] sends to other ranks
    at most [ceil (moved / holders)] pieces, [moved] the pieces of [c] the
    schedule moves (from a rank to another) and [holders] the number of
    source ranks holding [c]: its share rounded up to one piece; and at
    most that many times [M] elements, for any [M] bounding the size of
    every moved piece of [c]. *)
Theorem xplan_bal_balanced : forall m1 r1 t1 m2 r2 t2 start pss,
  xplan_bal m1 r1 t1 m2 r2 t2 start = Some pss ->
  forall r c, In (r, c) (srcs m1 r1 t1) ->
  nsent r r2 pss * length (holders (srcs m1 r1 t1) c)
    <= nmoved c r2 pss + length (holders (srcs m1 r1 t1) c) - 1 /\
  forall M, (forall j ps q, nth_error pss j = Some ps -> In q ps -> pcell q = c -> psrc q <> nth j r2 0 ->
               vol (pbox q) <= M) ->
  vsent r r2 pss <= nsent r r2 pss * M.
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss' H r c Hrc.
  pose proof (xplan_bal_correct _ _ _ _ _ _ _ _ H) as [Hl' Hn'].
  unfold xplan_bal in H. destruct (xplan m1 r1 t1 m2 r2 t2) as [pss|] eqn:Ex; [|discriminate].
  injection H as <-.
  assert (Hx : xsched (sdims m1 t1) (srcs m1 r1 t1) (tgts m2 r2 t2) = Some pss).
  { unfold xplan in Ex. destruct (_ && _); [exact Ex|discriminate]. }
  destruct (xsched_spec _ _ _ _ Hx) as [Hnd [Hok [Hlen Hsch]]].
  destruct (xsched_correct _ _ _ _ Hx) as [_ Hcor].
  assert (Hs : forall ps q, In ps pss -> In q ps -> In (psrc q, pcell q) (srcs m1 r1 t1)).
  { intros ps q Hps Hq. apply In_nth_error in Hps. destruct Hps as [j Ej].
    assert (Hj : j < length (tgts m2 r2 t2)) by (rewrite <- Hlen; apply nth_error_Some; congruence).
    destruct (nth_error (tgts m2 r2 t2) j) as [[self T]|] eqn:Et; [|apply nth_error_Some in Hj; congruence].
    destruct (Hcor j self T Et) as [ps0 [E0 [_ [Hsnd _]]]]. rewrite Ej in E0. injection E0 as <-.
    apply Hsnd; auto. }
  assert (Hself : forall j ps q, nth_error pss j = Some ps -> In q ps ->
            memb (nth j r2 0) (holders (srcs m1 r1 t1) (pcell q)) = true -> psrc q = nth j r2 0).
  { intros j ps q Ej Hq Hm.
    assert (Hj : j < length (tgts m2 r2 t2)) by (rewrite <- Hlen; apply nth_error_Some; congruence).
    destruct (nth_error (tgts m2 r2 t2) j) as [[self T]|] eqn:Et; [|apply nth_error_Some in Hj; congruence].
    rewrite <- (tgts_nth _ _ _ _ _ _ Et) in Hm |- *.
    destruct (Hsch j _ Et) as [ps0 [E0 Hs1]]. rewrite Ej in E0. injection E0 as <-.
    destruct (pick_all_spec _ _ _ _ _ (sched1_pa _ _ _ _ _ _ Hs1)) as [_ Hpk].
    specialize (Hpk q Hq). unfold pick, pick_from in Hpk. rewrite Hm in Hpk. congruence. }
  assert (Hrh : In r (holders (srcs m1 r1 t1) c)) by (apply holders_in; exact Hrc).
  destruct (In_nth _ _ 0 Hrh) as [i [Hi Hri]].
  split.
  - rewrite (spread_count (sdims m1 t1) (srcs m1 r1 t1) start r c i Hnd Hok Hrc Hi Hri pss r2 (NatMap.empty nat) Hs Hself).
    rewrite find_or_empty, Nat.add_0_r. apply win_bound; lia.
  - intros M HM. apply vsent_le with (c := c); auto.
    intros j ps q Ej Hq Er Ht.
    assert (Hj : j < ndevices m2) by (rewrite <- Hl'; apply nth_error_Some; congruence).
    destruct (Hn' j Hj) as [ps0 [E0 [_ [_ [Hsnd _]]]]]. rewrite Ej in E0. injection E0 as <-.
    destruct (Hsnd q Hq) as [Hin _]. rewrite Er in Hin. eapply nodup_fst; eauto.
Qed.
