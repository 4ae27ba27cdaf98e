(** The validator the synthesizer applies to its candidates: normal form
    (slices, then all-to-alls and permutes, then gathers), slices and
    gathers that touch only the right axes, the memory bound, and the cost
    order on validated plans; with what [validate] guarantees
    ([validate_spec], [nf_slices_spec], [axes_ok_spec]). *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker.
Import ListNotations.

(** * Normal form *)

Definition is_slice (c : coll) : bool := match c with DynSlice _ _ => true | _ => false end.

Definition is_gather (c : coll) : bool := match c with AllGather _ _ => true | _ => false end.

Definition is_mid (c : coll) : bool :=
  match c with AllToAll _ _ _ | AllPermute _ => true | _ => false end.

(** Normal form: slices, then all-to-alls and permutes, then gathers. *)
Definition normal_form (p : plan) : Prop :=
  exists p1 p2 p3, p = p1 ++ p2 ++ p3 /\
    Forall (fun c => is_slice c = true) p1 /\
    Forall (fun c => is_mid c = true) p2 /\
    Forall (fun c => is_gather c = true) p3.

Fixpoint nf_mid (p : plan) : bool :=
  match p with
  | [] => true
  | c :: p' => if is_mid c then nf_mid p' else forallb is_gather p
  end.

Fixpoint nf_slices (p : plan) : bool :=
  match p with
  | [] => true
  | c :: p' => if is_slice c then nf_slices p' else nf_mid p
  end.

(** * Which axes slices and gathers touch *)

(** Slices add only axes [dst] uses; gathers remove only axes it does not use. *)
Definition axes_ok (dst : atype) (c : coll) : bool :=
  match c with
  | DynSlice _ xs => forallb (fun a => memb a (used dst)) xs
  | AllGather _ xs => forallb (fun a => negb (memb a (used dst))) xs
  | _ => true
  end.

(** * The validator *)

(** The memory bound; a candidate validates when the checker accepts it
    within the bound, in normal form, touching only the right axes. *)
Definition bound (m : mesh) (src dst : atype) : nat := Nat.max (size m src) (size m dst).

Definition validate (m : mesh) (src dst : atype) (p : plan) : option report :=
  match check m src dst p with
  | Ok r =>
      if (peak r <=? bound m src dst) && nf_slices p && forallb (axes_ok dst) p
      then Some r else None
  | Err _ => None
  end.

(** [validate m src dst] for the many candidates of one problem: the
    problem's own checks and the bound once, then for each plan what
    [check] does once they passed, computing each local size once
    ([run_sized]: [run] with the size of the current type carried, each
    step's received elements read from it, and the peak of the sizes);
    [validator_spec]: the same answer as [validate]. *)
Definition recv_sized (m : mesh) (s : nat) (t : atype) (c : coll) (t' : atype) : nat :=
  match c with
  | AllGather _ xs => (nprod m xs - 1) * s
  | DynSlice _ _ => 0
  | AllToAll _ _ xs => s - s / nprod m xs
  | AllPermute _ => if moves m t t' then s else 0
  end.

Fixpoint run_sized (m : mesh) (t : atype) (s : nat) (p : plan) (i : nat)
    : result (nat * error) (list atype * list nat * nat) :=
  match p with
  | [] => Ok ([t], [], s)
  | c :: p' =>
      match apply m t c with
      | Err e => Err (i, e)
      | Ok t1 =>
          match run_sized m t1 (size m t1) p' (S i) with
          | Err x => Err x
          | Ok (ts, rs, pk) => Ok (t :: ts, recv_sized m s t c t1 :: rs, Nat.max s pk)
          end
      end
  end.

(** [apply] for the checker's run ([apply_v_spec]: the same answer over a
    well-formed mesh): lookups, replacements and prefixes by index test the
    index instead of matching on it ([nth_opt], [set_at], [take], [drop]:
    [nth_error], [set_nth], [firstn], [skipn]), the mesh's length and the
    axes in use are computed once, and the permute's target is checked
    without the mesh's own check ([wf_meshb]). *)
Fixpoint nth_opt {A} (l : list A) (n : nat) : option A :=
  match l with
  | [] => None
  | x :: l' => if n =? 0 then Some x else nth_opt l' (pred n)
  end.

Fixpoint set_at {A} (l : list A) (n : nat) (x : A) : list A :=
  match l with
  | [] => []
  | h :: t => if n =? 0 then x :: t else h :: set_at t (pred n) x
  end.

Fixpoint take {A} (n : nat) (l : list A) : list A :=
  match l with
  | [] => []
  | x :: l' => if n =? 0 then [] else x :: take (pred n) l'
  end.

Fixpoint drop {A} (n : nat) (l : list A) : list A :=
  match l with
  | [] => []
  | _ :: l' => if n =? 0 then l else drop (pred n) l'
  end.

Lemma nth_opt_spec : forall A (l : list A) n, nth_opt l n = nth_error l n.
Proof. intros A l. induction l as [|x l IH]; intros [|n]; simpl; auto. Qed.

Lemma set_at_spec : forall A (l : list A) n x, set_at l n x = set_nth l n x.
Proof. intros A l. induction l as [|h l IH]; intros [|n] x; simpl; auto. rewrite IH. reflexivity. Qed.

Lemma take_spec : forall A n (l : list A), take n l = firstn n l.
Proof. intros A n l. revert n. induction l as [|x l IH]; intros [|n]; simpl; auto. rewrite IH. reflexivity. Qed.

Lemma drop_spec : forall A n (l : list A), drop n l = skipn n l.
Proof. intros A n l. revert n. induction l as [|x l IH]; intros [|n]; simpl; auto. Qed.

Definition strip_suffix_v (xs A : list nat) : option (list nat) :=
  let la := length A in
  let lx := length xs in
  let k := la - lx in
  if (lx <=? la) && nat_list_eqb (drop k A) xs then Some (take k A) else None.

Lemma strip_suffix_v_spec : forall xs A, strip_suffix_v xs A = strip_suffix xs A.
Proof. intros. unfold strip_suffix_v, strip_suffix. rewrite drop_spec, take_spec. reflexivity. Qed.

Definition apply_v (m : mesh) (t : atype) (c : coll) : result error atype :=
  match c with
  | AllGather d xs =>
      match nth_opt t d with
      | None => Err (BadDim d)
      | Some D =>
          match xs with
          | [] => Err NoAxes
          | _ => match strip_suffix_v xs (axes D) with
                 | None => Err NotMinorAxes
                 | Some P => Ok (set_at t d (mkdim P (gsize D)))
                 end
          end
      end
  | DynSlice d xs =>
      match nth_opt t d with
      | None => Err (BadDim d)
      | Some D =>
          match xs with
          | [] => Err NoAxes
          | _ =>
              let n := length m in
              match find (fun a => n <=? a) xs with
              | Some a => Err (AxisOutOfRange a)
              | None =>
                  if negb (nodupb xs) then Err RepeatedAxis else
                  let U := used t in
                  match find (fun a => memb a U) xs with
                  | Some a => Err (AxisInUse a)
                  | None =>
                      if lsize m D mod nprod m xs =? 0
                      then Ok (set_at t d (mkdim (axes D ++ xs) (gsize D)))
                      else Err NotDivisible
                  end
              end
          end
      end
  | AllToAll d e xs =>
      if d =? e then Err SameDim else
      match nth_opt t d, nth_opt t e with
      | None, _ => Err (BadDim d)
      | _, None => Err (BadDim e)
      | Some D, Some E =>
          match xs with
          | [] => Err NoAxes
          | _ => match strip_suffix_v xs (axes D) with
                 | None => Err NotMinorAxes
                 | Some P =>
                     if lsize m E mod nprod m xs =? 0
                     then Ok (set_at (set_at t d (mkdim P (gsize D))) e (mkdim (axes E ++ xs) (gsize E)))
                     else Err NotDivisible
                 end
          end
      end
  | AllPermute t' =>
      if negb (forallb (wf_dimb m) t' && nodupb (used t')) then Err BadTarget
      else if same_shape m t t' then Ok t' else Err ShapeChanged
  end.

Lemma apply_v_spec : forall m t c, wf_meshb m = true -> apply_v m t c = apply m t c.
Proof.
  intros m t c Hm. destruct c as [d xs|d xs|d e xs|t']; unfold apply_v, apply; cbv zeta; rewrite ?nth_opt_spec.
  - destruct (nth_error t d) as [D|]; [|reflexivity]. destruct xs as [|x xs]; [reflexivity|].
    rewrite strip_suffix_v_spec. destruct (strip_suffix (x :: xs) (axes D)); rewrite ?set_at_spec; reflexivity.
  - destruct (nth_error t d) as [D|]; [|reflexivity]. destruct xs as [|x xs]; [reflexivity|].
    rewrite set_at_spec. reflexivity.
  - destruct (d =? e); [reflexivity|]. destruct (nth_error t d) as [D|]; [|reflexivity].
    destruct (nth_error t e) as [E|]; [|reflexivity]. destruct xs as [|x xs]; [reflexivity|].
    rewrite strip_suffix_v_spec. destruct (strip_suffix (x :: xs) (axes D)); rewrite ?set_at_spec; reflexivity.
  - unfold wfb. rewrite Hm. reflexivity.
Qed.

(** The local size after step [c] from local size [s]: exact after a step
    the rules accept from a well-formed type ([size_after_step]). *)
Definition size_after (m : mesh) (s : nat) (c : coll) : nat :=
  match c with
  | DynSlice _ xs => s / nprod m xs
  | AllGather _ xs => s * nprod m xs
  | _ => s
  end.

(** [run_sized] with each local size computed from the one before instead
    of from the type ([run_inc_sized], from a well-formed type). *)
Fixpoint run_inc (m : mesh) (t : atype) (s : nat) (p : plan) (i : nat)
    : result (nat * error) (list atype * list nat * nat) :=
  match p with
  | [] => Ok ([t], [], s)
  | c :: p' =>
      match apply_v m t c with
      | Err e => Err (i, e)
      | Ok t1 =>
          match run_inc m t1 (size_after m s c) p' (S i) with
          | Err x => Err x
          | Ok (ts, rs, pk) => Ok (t :: ts, recv_sized m s t c t1 :: rs, Nat.max s pk)
          end
      end
  end.

Definition check_plan (m : mesh) (src dst : atype) (p : plan) : result (nat * error) report :=
  match run_inc m src (size m src) p 1 with
  | Err x => Err x
  | Ok (ts, rs, pk) =>
      if atype_eqb (last ts src) dst
      then Ok (mkreport ts pk rs)
      else Err (length p, WrongResult)
  end.

(** Where the problem is known valid ([problem_error m src dst = None]):
    [validator_valid_spec]. *)
Definition validator_valid (m : mesh) (src dst : atype) : plan -> option report :=
  let B := bound m src dst in
  fun p => match check_plan m src dst p with
           | Ok r => if (peak r <=? B) && nf_slices p && forallb (axes_ok dst) p then Some r else None
           | Err _ => None
           end.

Definition validator (m : mesh) (src dst : atype) : plan -> option report :=
  match problem_error m src dst with
  | Some _ => fun _ => None
  | None => validator_valid m src dst
  end.

(** * Ranking validated plans *)

(** Whole axes. The core sees only the refined mesh; the parts of one
    axis are consecutive and appear together, in order, wherever the source
    or the target uses them. [glue] lists the parts [i] that every dimension
    of the source and the target holds together with [i + 1], right after it;
    plans that keep these pairs together can be written over whole axes. *)
Fixpoint adj (i j : nat) (l : list nat) : bool :=
  match l with
  | a :: ((b :: _) as t) => ((a =? i) && (b =? j)) || adj i j t
  | _ => false
  end.

Definition glued_in (i : nat) (l : list nat) : bool :=
  Bool.eqb (memb i l) (memb (S i) l) && (negb (memb i l) || adj i (S i) l).

(** [glued_in] in one pass ([glued_at_spec]). *)
Fixpoint glued_at (i : nat) (l : list nat) : bool :=
  match l with
  | [] => true
  | a :: t =>
      if a =? i then match t with b :: _ => (b =? S i) || adj i (S i) t | [] => false end
      else if a =? S i then adj i (S i) t
      else glued_at i t
  end.

Lemma adj_cons : forall i j a t, adj i j (a :: t) =
  ((a =? i) && match t with b :: _ => b =? j | [] => false end) || adj i j t.
Proof. intros i j a [|b t]; simpl; [rewrite andb_false_r|]; reflexivity. Qed.

Lemma adj_memb : forall i j l, adj i j l = true -> memb i l = true /\ memb j l = true.
Proof.
  intros i j l. induction l as [|a t IH]; [discriminate|]. rewrite adj_cons. intros H.
  apply orb_true_iff in H as [H|H].
  - apply andb_true_iff in H as [Ha Hb]. apply Nat.eqb_eq in Ha. subst a.
    destruct t as [|b t]; [discriminate|]. apply Nat.eqb_eq in Hb. subst b.
    simpl. rewrite !Nat.eqb_refl. simpl. rewrite orb_true_r. auto.
  - destruct (IH H) as [H1 H2]. simpl. rewrite H1, H2, !orb_true_r. auto.
Qed.

Lemma glued_at_spec : forall i l, glued_at i l = glued_in i l.
Proof.
  intros i l. unfold glued_in. induction l as [|a t IH]; [reflexivity|].
  cbn [glued_at memb]. rewrite adj_cons.
  destruct (Nat.eqb_spec a i) as [->|Hai].
  - rewrite (Nat.eqb_refl i). replace (S i =? i) with false by (symmetry; apply Nat.eqb_neq; lia).
    destruct t as [|b t]; cbn [memb orb andb negb]; [reflexivity|].
    destruct (Nat.eqb_spec b (S i)) as [->|Hb]; cbn [orb andb negb eqb].
    + rewrite Nat.eqb_refl. reflexivity.
    + replace (S i =? b) with false by (symmetry; apply Nat.eqb_neq; auto). cbn [orb].
      destruct (adj i (S i) (b :: t)) eqn:E.
      * apply adj_memb in E as [_ E]. cbn [memb] in E. replace (S i =? b) with false in E by (symmetry; apply Nat.eqb_neq; auto).
        cbn [orb] in E. rewrite E. reflexivity.
      * rewrite andb_false_r. reflexivity.
  - replace (i =? a) with false by (symmetry; apply Nat.eqb_neq; auto).
    replace (a =? i) with false by (symmetry; apply Nat.eqb_neq; auto). cbn [orb andb].
    destruct (Nat.eqb_spec a (S i)) as [->|Has].
    + rewrite Nat.eqb_refl. cbn [orb]. destruct (adj i (S i) t) eqn:E.
      * apply adj_memb in E as [E _]. rewrite E. reflexivity.
      * destruct (memb i t); reflexivity.
    + replace (S i =? a) with false by (symmetry; apply Nat.eqb_neq; auto). cbn [orb]. exact IH.
Qed.

Definition respects (G : list nat) (t : atype) : bool :=
  forallb (fun i => forallb (fun D => glued_at i (axes D)) t) G.

(** The axes used computed once. *)
Definition glue (m : mesh) (src dst : atype) : list nat :=
  let Us := used src in
  let Ud := used dst in
  filter (fun i => (memb i Us || memb i Ud) && respects [i] src && respects [i] dst)
         (seq 0 (length m - 1)).

(** Traffic, then types that split a glued pair, then communicating collectives. *)
Definition cost (G : list nat) (p : plan) (r : report) : list nat :=
  [fold_right plus 0 (received r); length (filter (fun t => negb (respects G t)) (types r));
   length (filter (fun c => negb (is_slice c)) p)].

Fixpoint better (x y : list nat) : bool :=
  match x, y with
  | a :: x', b :: y' => (a <? b) || ((a =? b) && better x' y')
  | _, _ => false
  end.

(** * What validation guarantees *)

Lemma validate_spec : forall m src dst p r, validate m src dst p = Some r ->
  check m src dst p = Ok r /\ peak r <= bound m src dst /\ nf_slices p = true /\
  forallb (axes_ok dst) p = true.
Proof.
  intros m src dst p r. unfold validate.
  destruct (check m src dst p) as [r'|]; [|discriminate].
  destruct ((peak r' <=? bound m src dst) && nf_slices p && forallb (axes_ok dst) p) eqn:E;
    [|discriminate].
  intros H; inversion H; subst. rewrite !andb_true_iff, Nat.leb_le in E. tauto.
Qed.

Lemma run_sized_run : forall m p t i, run_sized m t (size m t) p i =
  match run m t p i with Ok (ts, rs) => Ok (ts, rs, peak_of m ts) | Err x => Err x end.
Proof.
  intros m p. induction p as [|c p IH]; intros t i; cbn [run_sized run].
  - cbn [peak_of fold_right]. now rewrite Nat.max_0_r.
  - destruct (apply m t c) as [t1|e]; [|reflexivity]. rewrite IH.
    destruct (run m t1 p (S i)) as [[ts rs]|x]; [|reflexivity].
    replace (recv_sized m (size m t) t c t1) with (recv m t c t1) by (destruct c; reflexivity).
    reflexivity.
Qed.

(** * Local sizes along a step *)

Lemma size_gather : forall m t d P xs g, wf m t -> nth_error t d = Some (mkdim (P ++ xs) g) ->
  size m (set_nth t d (mkdim P g)) = size m t * nprod m xs.
Proof.
  intros m t d P xs g Hw Hd.
  pose proof (wf_nth m t d _ Hw Hd) as HD. destruct Hw as [Hm _].
  assert (Hpos := lsize_pos m _ Hm HD). assert (HlP := lsize_prefix m P xs g Hm HD).
  rewrite !size_prod. rewrite map_set_nth.
  assert (E := prod_set_nth (map (lsize m) t) d (lsize m (mkdim P g)) (lsize m (mkdim (P ++ xs) g))).
  rewrite nth_error_map, Hd in E. specialize (E eq_refl).
  rewrite HlP in E.
  apply (Nat.mul_cancel_r _ _ (lsize m {| axes := P ++ xs; gsize := g |})); [lia|].
  rewrite HlP. rewrite E. ring.
Qed.

Lemma step_size_mid : forall m t c t', wf m t -> step m t c t' -> is_mid c = true -> size m t' = size m t.
Proof.
  intros m t c t' Hw Hs Hc. destruct c; try discriminate.
  - inversion Hs as [| |? ? ? P g E Hde Hd He Hne Hdiv|]; subst.
    pose proof Hw as [Hm _].
    pose proof (wf_nth m t d _ Hw Hd) as HD. pose proof (wf_nth m t e E Hw He) as HE.
    assert (HpD := lsize_pos m _ Hm HD). assert (HpE := lsize_pos m _ Hm HE).
    destruct Hdiv as [q Hq].
    assert (H1 := lsize_prefix m P xs g Hm HD). assert (H2 := lsize_extend m E xs q Hm HE Hq).
    destruct HD as [_ [HaxD _]]. simpl in HaxD.
    assert (Hx : 0 < nprod m xs) by (apply nprod_pos; auto; intros; apply HaxD, in_or_app; auto).
    set (Ld := lsize m (mkdim (P ++ xs) g)) in *. set (Le := lsize m E) in *.
    rewrite !size_prod. rewrite !map_set_nth.
    assert (E1 := prod_set_nth (map (lsize m) t) d (lsize m (mkdim P g)) Ld).
    rewrite nth_error_map, Hd in E1. specialize (E1 eq_refl).
    assert (E2 := prod_set_nth (set_nth (map (lsize m) t) d (lsize m (mkdim P g))) e
                   (lsize m (mkdim (axes E ++ xs) (gsize E))) Le).
    rewrite nth_error_set_nth_neq, nth_error_map, He in E2 by auto. specialize (E2 eq_refl).
    rewrite H1 in E1, E2 |- *. rewrite H2 in E2 |- *. rewrite Hq in E2.
    set (L := map (lsize m) t) in *.
    set (Y := prod (set_nth L d (Ld * nprod m xs))) in *.
    set (X := prod (set_nth (set_nth L d (Ld * nprod m xs)) e q)) in *.
    assert (Hq0 : 0 < q) by (destruct q; simpl in Hq; lia).
    apply (Nat.mul_cancel_r _ _ (q * nprod m xs * Ld)); [nia|].
    replace (X * (q * nprod m xs * Ld)) with ((X * (q * nprod m xs)) * Ld) by ring.
    rewrite E2. replace (Y * q * Ld) with ((Y * Ld) * q) by ring. rewrite E1. ring.
  - inversion Hs as [| | |? Hw' Hg Hl]; subst. rewrite !size_prod. rewrite Hl. auto.
Qed.

Lemma size_after_step : forall m t c t1, wf m t -> step m t c t1 -> size m t1 = size_after m (size m t) c.
Proof.
  intros m t c t1 Hw Hs. destruct c as [d xs|d xs|d e xs|t'].
  - inversion Hs as [? ? P g Hd Hne| | |]; subst. cbn [size_after]. apply size_gather; auto.
  - cbn [size_after]. pose proof (step_wf m t _ t1 Hw Hs) as Hw1.
    inversion Hs as [|? ? D Hd Hne Hr Hnd Hu Hdv| |]; subst.
    assert (Hlt : d < length t) by (apply nth_error_Some; congruence).
    assert (Hd1 : nth_error (set_nth t d (mkdim (axes D ++ xs) (gsize D))) d = Some (mkdim (axes D ++ xs) (gsize D)))
      by (apply nth_error_set_nth_eq; exact Hlt).
    pose proof (size_gather m _ d (axes D) xs (gsize D) Hw1 Hd1) as E.
    assert (Es : set_nth (set_nth t d (mkdim (axes D ++ xs) (gsize D))) d (mkdim (axes D) (gsize D)) = t).
    { clear -Hd. revert d Hd. induction t as [|x t IH]; intros [|d] Hd; simpl in *; try discriminate.
      - inversion Hd; subst. destruct D; reflexivity.
      - f_equal. apply IH; auto. }
    rewrite Es in E. rewrite E. symmetry. apply Nat.div_mul.
    assert (0 < nprod m xs) by (apply nprod_pos; [apply Hw|exact Hr]). lia.
  - cbn [size_after]. eapply step_size_mid; eauto.
  - cbn [size_after]. eapply step_size_mid; eauto.
Qed.

Lemma run_inc_sized : forall m p t i, wf m t -> run_inc m t (size m t) p i = run_sized m t (size m t) p i.
Proof.
  intros m p. induction p as [|c p IH]; intros t i Hw; cbn [run_inc run_sized]; [reflexivity|].
  rewrite apply_v_spec by (apply wf_meshb_spec, Hw).
  destruct (apply m t c) as [t1|e] eqn:E; [|reflexivity].
  apply (apply_spec m t c t1 Hw) in E.
  rewrite <- (size_after_step m t c t1 Hw E). rewrite IH by (eapply step_wf; eauto). reflexivity.
Qed.

Lemma validator_valid_spec : forall m src dst p, problem_error m src dst = None ->
  validator_valid m src dst p = validate m src dst p.
Proof.
  intros m src dst p E. unfold validator_valid, validate, check. rewrite E. cbv beta zeta.
  unfold check_plan. rewrite run_inc_sized by (apply (problem_error_with_ok wf wfb (map gsize) m src dst (wfb_spec m) E)).
  rewrite run_sized_run.
  destruct (run m src p 1) as [[ts rs]|x]; reflexivity.
Qed.

Lemma validator_spec : forall m src dst p, validator m src dst p = validate m src dst p.
Proof.
  intros. unfold validator. destruct (problem_error m src dst) eqn:E.
  - unfold validate, check. rewrite E. reflexivity.
  - apply validator_valid_spec; auto.
Qed.

Lemma nf_mid_spec : forall p, nf_mid p = true ->
  exists p2 p3, p = p2 ++ p3 /\ Forall (fun c => is_mid c = true) p2 /\
                Forall (fun c => is_gather c = true) p3.
Proof.
  induction p as [|c p IH]; simpl; intros H.
  - exists [], []. auto.
  - destruct (is_mid c) eqn:Ec.
    + destruct (IH H) as [p2 [p3 [-> [H2 H3]]]]. exists (c :: p2), p3. auto.
    + exists [], (c :: p). simpl. split; auto. split; auto.
      apply Forall_forall. intros x Hx. assert (Hg : forallb is_gather (c :: p) = true) by exact H. rewrite forallb_forall in Hg. apply Hg; auto.
Qed.

Lemma nf_slices_spec : forall p, nf_slices p = true -> normal_form p.
Proof.
  induction p as [|c p IH]; simpl; intros H.
  - exists [], [], []. auto.
  - destruct (is_slice c) eqn:Ec.
    + destruct (IH H) as [p1 [p2 [p3 [-> [H1 [H2 H3]]]]]].
      exists (c :: p1), p2, p3. auto.
    + destruct (nf_mid_spec (c :: p) H) as [p2 [p3 [E [H2 H3]]]].
      exists [], p2, p3. simpl. auto.
Qed.

Lemma nf_build : forall p1 p2 p3, Forall (fun c => is_slice c = true) p1 ->
  Forall (fun c => is_mid c = true) p2 -> Forall (fun c => is_gather c = true) p3 ->
  nf_slices (p1 ++ p2 ++ p3) = true.
Proof.
  intros p1 p2 p3 H1 H2 H3. induction H1 as [|c p1 Hc H1 IH]; simpl.
  - destruct H2 as [|c p2 Hc H2].
    + simpl. destruct H3 as [|c p3 Hc H3]; simpl; auto.
      destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
    + simpl. destruct c; try discriminate; simpl.
      * clear Hc. induction H2 as [|c p2 Hc H2 IH]; simpl.
        -- destruct H3 as [|c p3 Hc H3]; simpl; auto.
           destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
        -- destruct c; try discriminate; simpl; auto.
      * clear Hc. induction H2 as [|c p2 Hc H2 IH]; simpl.
        -- destruct H3 as [|c p3 Hc H3]; simpl; auto.
           destruct c; try discriminate; simpl; apply forallb_forall; rewrite Forall_forall in H3; auto.
        -- destruct c; try discriminate; simpl; auto.
  - rewrite Hc. auto.
Qed.

(** What [axes_ok] says. *)
Definition axes_ok_prop (dst : atype) (c : coll) : Prop :=
  match c with
  | DynSlice _ xs => forall a, In a xs -> In a (used dst)
  | AllGather _ xs => forall a, In a xs -> ~ In a (used dst)
  | _ => True
  end.

Lemma axes_ok_spec : forall dst c, axes_ok dst c = true -> axes_ok_prop dst c.
Proof.
  intros dst c. destruct c; simpl; auto; rewrite forallb_forall; intros H a Ha.
  - specialize (H a Ha). apply negb_true_iff in H. intro Hin. apply memb_spec in Hin. congruence.
  - apply memb_spec. auto.
Qed.
