(** Proofs for [Cover.v]: [holds_box] decides whether a layout holds every
    index of a box ([holds_box_spec]), [bcovers] whether the source layout
    covers the array and every target box lies in it ([bcovers_spec]); and
    under [bcovers], every target rank of the box schedule ends with every
    index of its box exactly once ([brounds_complete]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Crossmesh Rounds Boxes Boxesproof Boxesworldproof Cover.
Import ListNotations.

Lemma held_cons : forall p r B srcs, held_by_any p ((r, B) :: srcs) = in_boxb p B || held_by_any p srcs.
Proof. reflexivity. Qed.

(** A box that meets no index of [B] keeps every count. *)
Lemma meet_empty : forall p R B, length R = length B -> nonempty (bmeet R B) = false ->
  in_boxb p R && in_boxb p B = false.
Proof.
  intros p R B Hl H. rewrite <- bmeet_in by exact Hl.
  destruct (in_boxb p (bmeet R B)) eqn:E; auto. rewrite (in_nonempty _ _ E) in H. discriminate.
Qed.

Lemma take_out_hits : forall p B rem n, dims n rem -> length B = n ->
  hits p (take_out B rem) = if in_boxb p B then 0 else hits p rem.
Proof.
  intros p B rem n Hd HB. induction rem as [|R rem IH]; simpl.
  - destruct (in_boxb p B); reflexivity.
  - assert (HR : length R = n) by (apply Hd; left; reflexivity).
    rewrite hits_app, hits_cons, IH by (intros R' HR'; apply Hd; right; exact HR').
    destruct (nonempty (bmeet R B)) eqn:E.
    + rewrite hits_prune, bsub_hits by lia.
      destruct (in_boxb p R), (in_boxb p B); reflexivity.
    + pose proof (meet_empty p R B ltac:(lia) E) as H0. rewrite hits_cons. simpl.
      destruct (in_boxb p R), (in_boxb p B); simpl in *; try discriminate; reflexivity.
Qed.

Lemma take_out_dims : forall B rem n, dims n rem -> dims n (take_out B rem).
Proof.
  intros B rem n Hd R' HR'. unfold take_out in HR'. apply in_flat_map in HR' as (R & HR & HR').
  destruct (nonempty (bmeet R B)).
  - apply filter_In in HR' as [HR' _]. rewrite (bsub_length _ _ _ HR'). auto.
  - destruct HR' as [<-|[]]. auto.
Qed.

(** What is left of [rem] holds an index exactly where [rem] does and no
    holder does. *)
Lemma unheld_hits : forall srcs rem n p, dims n rem -> src_dims n srcs ->
  hits p (unheld srcs rem) = if held_by_any p srcs then 0 else hits p rem.
Proof.
  induction srcs as [|[r B] srcs IH]; intros rem n p Hd Hs; simpl; auto.
  assert (HB : length B = n) by exact (Hs (r, B) (or_introl eq_refl)).
  assert (Hs' : src_dims n srcs) by (intros s Hin; apply Hs; right; exact Hin).
  rewrite (IH _ n p (take_out_dims B rem n Hd) Hs'), (take_out_hits p B rem n Hd HB).
  unfold held_by_any. simpl. fold (held_by_any p srcs).
  destruct (in_boxb p B), (held_by_any p srcs); reflexivity.
Qed.

(** A nonempty box holds its corner. *)
Lemma nonempty_corner : forall R, nonempty R = true -> in_boxb (map fst R) R = true.
Proof.
  induction R as [|[s l] R IH]; simpl; auto.
  intro H. apply andb_true_iff in H as [H1 H2]. rewrite (IH H2), andb_true_r.
  unfold insideb. simpl. apply andb_true_iff. split; [apply Nat.leb_le | apply Nat.ltb_lt; apply Nat.ltb_lt in H1]; lia.
Qed.

Lemma hits_pos : forall p L, 0 < hits p L <-> exists R, In R L /\ in_boxb p R = true.
Proof.
  intros p L. unfold hits. split.
  - intro H. destruct (filter (in_boxb p) L) as [|R l] eqn:E; simpl in H; [lia|].
    assert (HR : In R (filter (in_boxb p) L)) by (rewrite E; left; reflexivity).
    apply filter_In in HR. eauto.
  - intros (R & HR & Hp). assert (In R (filter (in_boxb p) L)) by (apply filter_In; auto).
    destruct (filter (in_boxb p) L); simpl in *; [contradiction|lia].
Qed.

(** [holds_box] decides whether the holders hold every index of [T]. *)
Theorem holds_box_spec : forall srcs T, src_dims (length T) srcs ->
  holds_box srcs T = true <-> forall p, in_boxb p T = true -> held_by_any p srcs = true.
Proof.
  intros srcs T Hs.
  assert (Hd : dims (length T) [T]) by (intros R [<-|[]]; reflexivity).
  unfold holds_box. split.
  - intros H p Hp. destruct (held_by_any p srcs) eqn:E; auto. exfalso.
    pose proof (unheld_hits srcs [T] (length T) p Hd Hs) as Hh. rewrite E, hits_cons, Hp in Hh.
    assert (Hpos : 0 < hits p (unheld srcs [T])) by lia.
    apply hits_pos in Hpos as (R & HR & HpR).
    rewrite forallb_forall in H. specialize (H R HR). rewrite (in_nonempty _ _ HpR) in H. discriminate.
  - intros H. apply forallb_forall. intros R HR. destruct (nonempty R) eqn:E; auto. exfalso.
    set (p := map fst R).
    assert (Hpos : 0 < hits p (unheld srcs [T])) by (apply hits_pos; exists R; split; auto; apply nonempty_corner; auto).
    rewrite (unheld_hits srcs [T] (length T) p Hd Hs), hits_cons in Hpos.
    destruct (in_boxb p T) eqn:HpT.
    + rewrite (H p HpT) in Hpos. simpl in Hpos. lia.
    + unfold hits in Hpos. destruct (held_by_any p srcs); simpl in Hpos; lia.
Qed.

Lemma whole_length : forall shape, length (whole shape) = length shape.
Proof. intros. unfold whole. apply map_length. Qed.

(** [bcovers] decides its two conditions: the source layout holds every
    index of the array, and every index of a target box lies in the array. *)
Theorem bcovers_spec : forall shape srcs tgts, src_dims (length shape) srcs ->
  (forall t, In t tgts -> length (snd t) = length shape) ->
  bcovers shape srcs tgts = true <->
  (forall p, in_boxb p (whole shape) = true -> held_by_any p srcs = true) /\
  (forall t p, In t tgts -> in_boxb p (snd t) = true -> in_boxb p (whole shape) = true).
Proof.
  intros shape srcs tgts Hs Ht. unfold bcovers.
  assert (Hs' : src_dims (length (whole shape)) srcs) by (rewrite whole_length; exact Hs).
  rewrite andb_true_iff, forallb_forall, (holds_box_spec srcs (whole shape) Hs').
  assert (E : forall t, In t tgts -> (holds_box [(0, whole shape)] (snd t) = true <->
                                      forall p, in_boxb p (snd t) = true -> in_boxb p (whole shape) = true)).
  { intros t Hin. rewrite holds_box_spec.
    - unfold held_by_any. simpl. split; intros H p Hp; specialize (H p Hp); rewrite ?orb_false_r in *; exact H.
    - intros s [<-|[]]. simpl. rewrite whole_length, Ht; auto. }
  split; intros [H1 H2]; split; auto.
  - intros t p Hin Hp. apply (E t Hin); auto.
  - intros t Hin. apply (E t Hin). intros p Hp. exact (H2 t p Hin Hp).
Qed.

(** **Full coverage of the target boxes**: when the source layout covers
    the array and every target box lies in it ([bcovers], checked before
    the schedule is run), the rounds of [Boxes.brounds] keep every
    guarantee of [Boxesworldproof.brounds_correct], and every target rank
    ends with every index of its box exactly once: from a piece it holds
    itself or in one cut addressed to it. *)
Theorem brounds_complete : forall shape (srcs tgts : layout) budget,
  src_dims (length shape) srcs -> (forall t, In t tgts -> length (snd t) = length shape) ->
  bcovers shape srcs tgts = true ->
  boxes_ok budget srcs tgts (brounds budget srcs tgts) /\
  forall j self T, nth_error tgts j = Some (self, T) ->
  exists ps, nth_error (bplan srcs tgts) j = Some ps /\
    forall p, in_boxb p T = true ->
      lsum (fun q => if psrc q =? self then (if in_boxb p (pbox q) then 1 else 0) else 0) ps
      + lsum (fun c => if ctgt c =? j then (if in_boxb p (cbox c) then 1 else 0) else 0)
             (concat (brounds budget srcs tgts)) = 1.
Proof.
  intros shape srcs tgts budget Hs Ht Hc.
  apply (bcovers_spec shape srcs tgts Hs Ht) in Hc as [Hheld Hin].
  assert (Hok : boxes_ok budget srcs tgts (brounds budget srcs tgts)).
  { apply brounds_correct. intros t Hi. rewrite (Ht t Hi). exact Hs. }
  split; [exact Hok|].
  intros j self T E. destruct Hok as [_ [_ Hok]].
  destruct (Hok j self T E) as [ps [Hps [_ [Hcount _]]]].
  exists ps. split; [exact Hps|]. intros p Hp. rewrite (Hcount p Hp).
  rewrite (Hheld p (Hin (self, T) p (nth_error_In _ _ E) Hp)). reflexivity.
Qed.
