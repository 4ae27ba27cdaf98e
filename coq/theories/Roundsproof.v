(** Proofs for [Rounds.v]: the cuts of a piece tile it exactly; the cuts of
    a target cover exactly what its pieces from other ranks cover; packing
    keeps every cut once and every round within the budget (a rank over it
    moves a single cut there); so with [Crossmesh.xplan]'s schedule, every
    element of every target block is either held by the target or received
    exactly once, in one round, from a rank whose source block holds it. *)
From Coq Require Import List Arith Lia Bool Permutation.
From VS Require Import Prelude Mesh Types Crossmesh Crossmeshproof Rounds.
Import ListNotations.

(** * Sums *)

Lemma lsum_zero : forall A (l : list A), lsum (fun _ => 0) l = 0.
Proof. intros A l. induction l; simpl; auto. Qed.

Lemma lsum_if_const : forall A (f : A -> nat) (b : bool) l,
  lsum (fun x => if b then f x else 0) l = if b then lsum f l else 0.
Proof. intros A f b l. destruct b; [reflexivity|apply lsum_zero]. Qed.

Lemma lsum_in_le : forall A (f : A -> nat) l x, In x l -> f x <= lsum f l.
Proof. intros A f l. induction l as [|y l IH]; simpl; intros x H; [contradiction|]. destruct H as [<-|H]; [lia|]. specialize (IH x H). lia. Qed.

Lemma lsum_perm : forall A (f : A -> nat) l l', Permutation l l' -> lsum f l = lsum f l'.
Proof. intros A f l l' H. induction H; simpl; lia. Qed.

(** * Runs tile an interval *)

Lemma runs_count : forall per fuel s l x, 0 < per -> l <= fuel ->
  lsum (fun iv => if insideb x iv then 1 else 0) (runs per s l fuel) = if insideb x (s, l) then 1 else 0.
Proof.
  intros per fuel. induction fuel as [|fuel IH]; intros s l x Hp Hl; simpl.
  - unfold insideb; simpl.
    destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + l)); simpl; lia.
  - destruct (Nat.eqb_spec l 0) as [->|Hl0].
    + unfold insideb; simpl. destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + 0)); simpl; lia.
    + simpl. rewrite IH by lia. unfold insideb; simpl.
      destruct (Nat.min_spec per l) as [[H1 H2]|[H1 H2]]; rewrite H2;
        destruct (Nat.leb_spec s x); destruct (Nat.ltb_spec x (s + per));
        destruct (Nat.leb_spec (s + per) x); destruct (Nat.ltb_spec x (s + per + (l - per)));
        destruct (Nat.ltb_spec x (s + l)); destruct (Nat.ltb_spec x (s + l)); simpl; lia.
Qed.

(** * Cut boxes tile the box *)

Lemma set_count : forall B p d ivs, d < length B ->
  (forall x, lsum (fun iv => if insideb x iv then 1 else 0) ivs = if insideb x (nth d B (0, 0)) then 1 else 0) ->
  lsum (fun r => if in_boxb p (set_nth B d r) then 1 else 0) ivs = if in_boxb p B then 1 else 0.
Proof.
  induction B as [|iv B IH]; intros p d ivs Hd H; simpl in Hd; [lia|].
  destruct p as [|x p].
  - transitivity (lsum (fun _ : interval => 0) ivs); [|apply lsum_zero].
    apply lsum_ext. intros r _. destruct d; reflexivity.
  - destruct d as [|d]; simpl.
    + destruct (in_boxb p B) eqn:E.
      * rewrite (lsum_ext _ _ (fun r => if insideb x r then 1 else 0)).
        -- rewrite H. simpl. rewrite andb_true_r. reflexivity.
        -- intros r _. rewrite andb_true_r. reflexivity.
      * rewrite andb_false_r. transitivity (lsum (fun _ : interval => 0) ivs); [|apply lsum_zero].
        apply lsum_ext. intros r _. rewrite andb_false_r. reflexivity.
    + destruct (insideb x iv) eqn:E; simpl.
      * apply IH; [lia|]. intros y. rewrite H. reflexivity.
      * apply lsum_zero.
Qed.

Lemma first_long_range : forall B i, first_long B i = 0 \/ (i <= first_long B i < i + length B).
Proof.
  induction B as [|iv B IH]; intros i; simpl; [auto|].
  destruct (1 <? snd iv); [right; lia|]. destruct (IH (S i)); [auto|right; lia].
Qed.

(** Every global index of a box lies in exactly one of its cuts, and in none if outside it. *)
Lemma cut_box_count : forall budget B p,
  lsum (fun C => if in_boxb p C then 1 else 0) (cut_box budget B) = if in_boxb p B then 1 else 0.
Proof.
  intros budget B p. destruct B as [|iv0 B0].
  - simpl. destruct (in_boxb p []); reflexivity.
  - cbn [cut_box]. remember (iv0 :: B0) as B eqn:EB. unfold cut_along.
    rewrite lsum_map. apply set_count.
    + destruct (first_long_range B 0) as [E|[_ H]]; subst B; [rewrite E; simpl; lia|exact H].
    + intros x. rewrite runs_count; [| lia | lia].
      rewrite <- surjective_pairing. reflexivity.
Qed.

Lemma cut_box_inside : forall budget B C p, In C (cut_box budget B) ->
  in_boxb p C = true -> in_boxb p B = true.
Proof.
  intros budget B C p HC Hp.
  pose proof (lsum_in_le _ (fun C => if in_boxb p C then 1 else 0) _ _ HC) as H.
  rewrite cut_box_count, Hp in H. destruct (in_boxb p B); [reflexivity|lia].
Qed.

(** * The cuts of a target *)

Lemma tcuts_count : forall budget j self ps p,
  lsum (fun c => if in_boxb p (cbox c) then 1 else 0) (tcuts budget j self ps)
  = lsum (fun q => if psrc q =? self then 0 else if in_boxb p (pbox q) then 1 else 0) ps.
Proof.
  intros. unfold tcuts. rewrite lsum_flat_map. apply lsum_ext. intros q _.
  destruct (psrc q =? self); [reflexivity|]. rewrite lsum_map. apply cut_box_count.
Qed.

Lemma tcuts_in : forall budget j self ps c, In c (tcuts budget j self ps) ->
  cdst c = self /\ ctgt c = j /\
  exists q, In q ps /\ psrc q <> self /\ csrc c = psrc q /\
    forall p, in_boxb p (cbox c) = true -> in_boxb p (pbox q) = true.
Proof.
  intros budget j self ps c H. unfold tcuts in H. apply in_flat_map in H. destruct H as [q [Hq Hc]].
  destruct (Nat.eqb_spec (psrc q) self) as [_|Hne]; [contradiction|].
  apply in_map_iff in Hc. destruct Hc as [C [<- HC]]. simpl. repeat split; auto.
  exists q. repeat split; auto. intros p Hp. eapply cut_box_inside; eauto.
Qed.

Lemma xcuts_from_seq : forall budget pss tr i,
  xcuts_from budget i tr pss = flat_map (fun j => tcuts budget j (nth (j - i) tr 0) (nth (j - i) pss [])) (seq i (length pss)).
Proof.
  intros budget pss. induction pss as [|ps pss IH]; intros tr i; [reflexivity|].
  cbn [xcuts_from length seq flat_map]. rewrite Nat.sub_diag, IH. f_equal; [destruct tr; reflexivity|].
  rewrite !flat_map_concat_map. f_equal. apply map_ext_in. intros k Hk. apply in_seq in Hk.
  replace (k - i) with (S (k - S i)) by lia.
  destruct tr; [destruct (k - S i); reflexivity|reflexivity].
Qed.

Lemma xcuts_nth : forall budget tr pss,
  xcuts budget tr pss = flat_map (fun j => tcuts budget j (nth j tr 0) (nth j pss [])) (seq 0 (length pss)).
Proof.
  intros. unfold xcuts. rewrite xcuts_from_seq, !flat_map_concat_map. f_equal. apply map_ext. intros k.
  rewrite Nat.sub_0_r. reflexivity.
Qed.

Lemma xcuts_in : forall budget tr pss c, In c (xcuts budget tr pss) ->
  ctgt c < length pss /\ In c (tcuts budget (ctgt c) (nth (ctgt c) tr 0) (nth (ctgt c) pss [])).
Proof.
  intros budget tr pss c H. rewrite xcuts_nth in H. apply in_flat_map in H. destruct H as [k [Hk Hc]].
  apply in_seq in Hk. pose proof (tcuts_in _ _ _ _ _ Hc) as [_ [Ht _]]. rewrite Ht. split; [lia|auto].
Qed.

(** Summing over the cuts of target [j] among all of them. *)
Lemma xcuts_tgt : forall budget tr pss j (g : cut -> nat), j < length pss ->
  lsum (fun c => if ctgt c =? j then g c else 0) (xcuts budget tr pss)
  = lsum g (tcuts budget j (nth j tr 0) (nth j pss [])).
Proof.
  intros budget tr pss j g Hj. rewrite xcuts_nth, lsum_flat_map.
  transitivity (lsum (fun k => if k =? j then lsum g (tcuts budget k (nth k tr 0) (nth k pss [])) else 0)
                     (seq 0 (length pss))).
  - apply lsum_ext. intros k _. destruct (Nat.eqb_spec k j) as [->|Hne].
    + apply lsum_ext. intros c Hc. apply tcuts_in in Hc. destruct Hc as [_ [-> _]]. rewrite Nat.eqb_refl. reflexivity.
    + transitivity (lsum (fun _ : cut => 0) (tcuts budget k (nth k tr 0) (nth k pss []))); [|apply lsum_zero].
      apply lsum_ext. intros c Hc. apply tcuts_in in Hc. destruct Hc as [_ [-> _]].
      destruct (Nat.eqb_spec k j); [contradiction|reflexivity].
  - apply (lsum_pick_seq (fun k => lsum g (tcuts budget k (nth k tr 0) (nth k pss [])))). exact Hj.
Qed.

(** * Packing *)

Lemma place_perm : forall budget c rs, Permutation (concat (place budget c rs)) (c :: concat rs).
Proof.
  intros budget c rs. induction rs as [|rd rs IH]; simpl; [auto|].
  destruct (fits budget c rd); simpl.
  - rewrite <- app_assoc. simpl. apply Permutation_sym, Permutation_middle.
  - eapply Permutation_trans; [apply Permutation_app_head, IH|]. apply Permutation_sym, Permutation_middle.
Qed.

Lemma pack_perm_from : forall budget cs rs,
  Permutation (concat (fold_left (fun rs c => place budget c rs) cs rs)) (cs ++ concat rs).
Proof.
  intros budget cs. induction cs as [|c cs IH]; intros rs; simpl; [auto|].
  eapply Permutation_trans; [apply IH|].
  eapply Permutation_trans; [apply Permutation_app_head, place_perm|].
  apply Permutation_sym, Permutation_middle.
Qed.

Lemma load_snoc : forall who r rd c,
  load who r (rd ++ [c]) = load who r rd + (if who c =? r then vol (cbox c) else 0).
Proof. intros. unfold load. rewrite lsum_app. simpl. lia. Qed.

(** A packed round stands for the round [rd] it holds: its cuts, last
    first, and each rank's load sent and received. *)
Definition holds_round (st : rstate) (rd : list cut) : Prop :=
  fst (fst st) = rev rd /\ (forall r, find_or 0 r (snd (fst st)) = load csrc r rd) /\
  (forall r, find_or 0 r (snd st) = load cdst r rd).

Lemma add_in_holds : forall c st rd, holds_round st rd -> holds_round (add_in c st) (rd ++ [c]).
Proof.
  intros c [[rv S] D] rd [Hr [HS HD]]. cbn [fst snd] in Hr, HS, HD. unfold holds_round, add_in. cbn [fst snd].
  split; [rewrite rev_unit, Hr; reflexivity|]. split; intros r; rewrite find_or_add, load_snoc.
  - rewrite !HS. destruct (csrc c =? r) eqn:E; [apply Nat.eqb_eq in E; subst|]; lia.
  - rewrite !HD. destruct (cdst c =? r) eqn:E; [apply Nat.eqb_eq in E; subst|]; lia.
Qed.

Lemma fits_in_holds : forall budget c st rd, holds_round st rd -> fits_in budget c st = fits budget c rd.
Proof. intros budget c [[rv S] D] rd [_ [HS HD]]. cbn [fst snd] in *. unfold fits_in, fits. rewrite HS, HD. reflexivity. Qed.

Lemma place_in_holds : forall budget c sts rds, Forall2 holds_round sts rds ->
  Forall2 holds_round (place_in budget c sts) (place budget c rds).
Proof.
  intros budget c sts rds H. induction H as [|st rd sts rds Hh H IH]; cbn [place_in place].
  - constructor; [|constructor]. apply (add_in_holds c _ [] ). repeat split; reflexivity.
  - rewrite (fits_in_holds _ _ _ _ Hh). destruct (fits budget c rd); constructor; auto. apply add_in_holds; auto.
Qed.

(** [pack] is first fit by [place]. *)
Lemma pack_place : forall budget cs, pack budget cs = fold_left (fun rs c => place budget c rs) cs [].
Proof.
  intros budget cs. unfold pack.
  assert (G : forall sts rds, Forall2 holds_round sts rds ->
    Forall2 holds_round (fold_left (fun rs c => place_in budget c rs) cs sts) (fold_left (fun rs c => place budget c rs) cs rds)).
  { induction cs as [|c cs IH]; intros sts rds H; [exact H|]. apply IH, place_in_holds, H. }
  specialize (G [] [] (Forall2_nil _)). induction G as [|st rd sts rds [Hr _] _ IH]; [reflexivity|].
  cbn [map]. rewrite IH. unfold rev'. rewrite <- rev_alt, Hr, rev_involutive. reflexivity.
Qed.

(** Every cut is in exactly one round. *)
Theorem pack_perm : forall budget cs, Permutation (concat (pack budget cs)) cs.
Proof. intros. rewrite pack_place. rewrite <- (app_nil_r cs) at 2. apply pack_perm_from. Qed.

(** A round is within the budget: every rank sends at most [budget]
    elements or sends exactly one cut, and receives at most [budget]
    elements or receives exactly one cut. *)
Definition bounded (budget : nat) (rd : list cut) : Prop :=
  forall r, (load csrc r rd <= budget \/ length (filter (fun c => csrc c =? r) rd) = 1) /\
            (load cdst r rd <= budget \/ length (filter (fun c => cdst c =? r) rd) = 1).

Lemma count_snoc : forall (who : cut -> nat) r (rd : list cut) c,
  length (filter (fun c => who c =? r) (rd ++ [c])) = length (filter (fun c => who c =? r) rd) + (if who c =? r then 1 else 0).
Proof. intros. rewrite filter_app, app_length. simpl. destruct (who c =? r); simpl; lia. Qed.

Lemma bounded_single : forall budget c, bounded budget [c].
Proof.
  intros budget c r. unfold load. simpl.
  split; [destruct (Nat.eqb_spec (csrc c) r)|destruct (Nat.eqb_spec (cdst c) r)]; simpl; auto; lia.
Qed.

Lemma bounded_snoc : forall budget c rd, bounded budget rd -> fits budget c rd = true -> bounded budget (rd ++ [c]).
Proof.
  intros budget c rd H F r. unfold fits in F. apply andb_true_iff in F. destruct F as [F1 F2].
  apply Nat.leb_le in F1. apply Nat.leb_le in F2. destruct (H r) as [Hs Hd].
  rewrite !load_snoc, !count_snoc. split.
  - destruct (csrc c =? r) eqn:E; [apply Nat.eqb_eq in E; subst; left; lia|]. rewrite !Nat.add_0_r. exact Hs.
  - destruct (cdst c =? r) eqn:E; [apply Nat.eqb_eq in E; subst; left; lia|]. rewrite !Nat.add_0_r. exact Hd.
Qed.

Lemma place_bounded : forall budget c rs, (forall rd, In rd rs -> bounded budget rd) ->
  forall rd, In rd (place budget c rs) -> bounded budget rd.
Proof.
  intros budget c rs. induction rs as [|rd0 rs IH]; simpl; intros H rd Hin.
  - destruct Hin as [<-|[]]. apply bounded_single.
  - destruct (fits budget c rd0) eqn:F; simpl in Hin; destruct Hin as [<-|Hin].
    + apply bounded_snoc; auto.
    + auto.
    + auto.
    + apply IH; auto.
Qed.

Theorem pack_bounded : forall budget cs rd, In rd (pack budget cs) -> bounded budget rd.
Proof.
  intros budget cs. rewrite pack_place.
  assert (forall rs, (forall rd, In rd rs -> bounded budget rd) ->
          forall rd, In rd (fold_left (fun rs c => place budget c rs) cs rs) -> bounded budget rd) as G.
  { induction cs as [|c cs IH]; simpl; intros rs H; auto. apply IH. apply place_bounded. exact H. }
  apply G. intros rd [].
Qed.

(** * End to end *)

Lemma tgts_nth : forall m r t j self T, nth_error (tgts m r t) j = Some (self, T) -> self = nth j r 0.
Proof.
  intros m r t j self T H. rewrite tgts_nth_map in H. rewrite nth_error_map in H.
  destruct (nth_error (seq 0 (ndevices m)) j) eqn:E; [|discriminate].
  assert (Hj : j < ndevices m).
  { rewrite <- (seq_length (ndevices m) 0). apply nth_error_Some. congruence. }
  apply (nth_error_nth _ _ 0) in E. rewrite seq_nth in E by exact Hj. simpl in E. subst n.
  simpl in H. injection H as <- _. reflexivity.
Qed.

(** The staged cross-mesh transfer: when [xplan] returns a schedule, its
    rounds ([xrounds budget]) hold every cut exactly once and each round is
    within the budget (a rank over it moves one cut there); and every target
    device [j] (world rank [self], block [T]) gets every element of its block
    exactly once: from a piece it holds itself, or in one cut addressed to it,
    which lies inside a piece of its schedule sent by another rank (so
    [xplan_correct]'s data statement applies to it). *)
Theorem xrounds_correct : forall m1 r1 t1 m2 r2 t2 pss budget,
  xplan m1 r1 t1 m2 r2 t2 = Some pss ->
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
  intros m1 r1 t1 m2 r2 t2 pss budget H.
  assert (Hs : xsched (sdims m1 t1) (srcs m1 r1 t1) (tgts m2 r2 t2) = Some pss).
  { unfold xplan in H. destruct (_ && _); [exact H|discriminate]. }
  destruct (xsched_correct _ _ _ _ Hs) as [Hl Hn].
  pose proof (pack_perm budget (xcuts budget r2 pss)) as Hp.
  split; [exact Hp|]. split; [apply pack_bounded|].
  intros j self T E. destruct (Hn j self T E) as [ps [Eps [Hcov [_ [_ _]]]]].
  exists ps. split; [exact Eps|].
  assert (Hj : j < length pss) by (rewrite Hl; apply nth_error_Some; congruence).
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
    rewrite (xcuts_tgt budget r2 pss j (fun c => if in_boxb p (cbox c) then 1 else 0) Hj).
    rewrite <- Hself, Hps. apply tcuts_count.
  - intros c Hc Ht. apply (Permutation_in _ Hp) in Hc. apply xcuts_in in Hc. destruct Hc as [_ Hc].
    rewrite Ht, <- Hself, Hps in Hc. apply tcuts_in in Hc. destruct Hc as [Hd [_ [q [Hq [Hne [Hsrc Hin]]]]]].
    split; [exact Hd|]. exists q. auto.
Qed.
